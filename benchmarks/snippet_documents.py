"""Five long office documents, written for the snippet benchmark (`benchmarks/snippets.py`), and
the five questions written before the first run, each answered by one sentence deep inside one
document. Each document is a title and its sections (heading, text), about 2,200 words; the
benchmark writes them as PDF (fpdf2), HTML, DOCX (python-docx) and Markdown.
"""

# (file, question, the answer sentence: it must be whole in the top hit's snippet)
QUESTIONS = [
    (
        "heat-pump-manual.pdf",
        "what refrigerant charge does the outdoor unit ship with",
        (
            "The outdoor unit is factory-charged with 1.9 kg of R32 refrigerant, enough for pipe runs of "
            "up to 15 metres."
        ),
    ),
    (
        "travel-policy.html",
        "how many days do I have to submit an expense claim after a trip",
        (
            "Expense claims must be submitted within 30 calendar days of the last day of travel; claims "
            "filed later need written approval from a director."
        ),
    ),
    (
        "board-minutes-q3.docx",
        "when will the Leeds warehouse open",
        (
            "The Leeds distribution centre is now expected to open on 14 March, six weeks later than "
            "planned, because the racking supplier missed its delivery window."
        ),
    ),
    (
        "billing-runbook.md",
        "how do I roll back a failed database migration",
        (
            "To roll back a failed migration, run make migrate-down STEP=1 from the release host and "
            "confirm the schema version in the admin console before restarting the workers."
        ),
    ),
    (
        "lab-safety-handbook.pdf",
        "what should I do if a chemical splashes in my eyes",
        (
            "If a chemical splashes into your eyes, rinse them at the nearest eyewash station for at "
            "least fifteen minutes while holding the eyelids open, then report to first aid."
        ),
    ),
]

HEAT_PUMP = (
    "Northwind HP-40 Air-to-Water Heat Pump - Installation and Service Manual",
    [
        (
            "About this manual",
            (
                "This manual is written for qualified installers and service engineers who fit, "
                "commission and maintain the Northwind HP-40 air-to-water heat pump. It covers the "
                "outdoor unit, the indoor hydraulic module, the controller and the optional domestic hot "
                "water cylinder. Read the whole manual before you start work, and keep it with the "
                "appliance so that the next engineer can find it. The figures in this manual refer to the"
                " 2024 production series; earlier units differ in the wiring of the controller and in the"
                " position of the service valves. Where a step can only be carried out by a person "
                "holding a refrigerant handling certificate, the text says so. Local building regulations"
                " always take precedence over the guidance given here. If a national rule asks for a "
                "larger clearance, a different fuse rating or an additional safety device, follow the "
                "national rule. Northwind accepts no liability for damage caused by installations that do"
                " not follow this manual or the regulations that apply at the site. Throughout the "
                "manual, warnings mark steps that can injure people, and cautions mark steps that can "
                "damage the equipment. Notes give background information that makes a task easier but is "
                "not required for a safe installation."
            ),
        ),
        (
            "Safety information",
            (
                "The HP-40 contains a flammable refrigerant, electrical parts at mains voltage and water "
                "that can reach sixty-five degrees. Switch off and isolate the power supply at the main "
                "isolator before opening any cover, and wait at least five minutes for the inverter "
                "capacitors to discharge. Never braze or use an open flame on the refrigerant circuit "
                "while it still contains refrigerant. Work in a well ventilated area and keep sources of "
                "ignition at least three metres away from the outdoor unit during service. Wear gloves "
                "and eye protection when handling refrigerant lines, because liquid refrigerant causes "
                "frostbite on contact with skin. Do not stand on the outdoor unit or use it as a step. "
                "The fan blades can continue to turn for some time after the unit stops, so wait until "
                "they are still before reaching into the fan chamber. Children and people who have not "
                "been instructed in its use must not operate or clean the appliance. When the unit is "
                "installed in a location that is accessible to the public, fit the optional guard to the "
                "fan outlet. Dispose of the packaging according to local recycling rules, and never leave"
                " plastic bags where children can reach them."
            ),
        ),
        (
            "Contents of the delivery",
            (
                "The outdoor unit is delivered on a wooden pallet with its feet already fitted. The "
                "accessory box is taped to the top of the unit and contains the condensate drain elbow, "
                "four anti-vibration pads, the outdoor temperature sensor with ten metres of cable, the "
                "installation manual and the user guide. The indoor hydraulic module is delivered in a "
                "separate carton together with its wall bracket, the expansion vessel, the filling loop "
                "and a bag of fixing screws. Check both deliveries against the packing list before the "
                "carrier leaves the site, and write any damage on the delivery note. Dents in the outer "
                "casing are usually cosmetic, but a bent coil or an oil stain under the unit may mean "
                "that the refrigerant circuit was damaged in transit. In that case do not install the "
                "unit; report the damage to your distributor with photographs. Keep the outdoor unit "
                "upright during transport and storage. If it has been tilted by more than forty-five "
                "degrees, leave it standing for at least two hours before you switch it on, so that the "
                "compressor oil can settle back into the sump. Store the units in a dry place out of "
                "direct sunlight until installation."
            ),
        ),
        (
            "Choosing a location for the outdoor unit",
            (
                "Place the outdoor unit where air can flow freely to the coil at the back and away from "
                "the fan at the front. Leave at least three hundred millimetres behind the unit, six "
                "hundred millimetres on the service side and one and a half metres in front of the fan. "
                "Do not install it in a recess or under a low canopy where cold discharge air can be "
                "drawn back into the coil, because this short-circuit of the airflow reduces the output "
                "and increases the number of defrost cycles. The unit produces condensate and, during "
                "defrost, a significant amount of melt water. Choose a base that drains well, or lead the"
                " condensate to a drain or a soakaway through the elbow supplied. In regions with heavy "
                "snowfall, mount the unit on a stand at least three hundred millimetres above the "
                "expected snow depth. Consider the neighbours: the sound power level of the HP-40 is "
                "fifty-five decibels at full load, and the unit should not face directly onto bedroom "
                "windows. Avoid locations near swimming pools, coastal spray or chemical vents, which "
                "corrode the coil fins. The base must be level within three degrees and strong enough to "
                "carry the operating weight of ninety-two kilograms."
            ),
        ),
        (
            "Refrigerant pipework",
            (
                "The HP-40 is a split system, so the outdoor unit and the indoor hydraulic module are "
                "joined by two copper refrigerant lines. Use refrigeration grade copper with a wall "
                "thickness of at least 0.8 mm, insulated with closed-cell foam of at least thirteen "
                "millimetres. The liquid line is 6.35 mm and the gas line is 12.7 mm for all pipe lengths"
                " permitted. The outdoor unit is factory-charged with 1.9 kg of R32 refrigerant, enough "
                "for pipe runs of up to 15 metres. For longer runs, add twenty grams of refrigerant for "
                "every additional metre, up to the maximum run of thirty metres, and record the added "
                "charge on the label inside the service panel. The height difference between the two "
                "units must not exceed twenty metres. Bend pipes with a proper bending tool and keep the "
                "bend radius at least three times the pipe diameter, because kinks restrict the flow and "
                "cause noise. Make flare connections with the flare tool and torque wrench settings given"
                " in the table at the end of this manual, and never reuse a flare nut that has been "
                "tightened before. After connecting the lines, pressure test the circuit with dry "
                "nitrogen at forty-two bar for at least one hour, then evacuate it to below five hundred "
                "microns before opening the service valves."
            ),
        ),
        (
            "Hydraulic connection",
            (
                "The indoor hydraulic module connects to the heating circuit through the flow and return "
                "ports at the bottom of the casing. Fit isolating valves on both ports so that the module"
                " can be removed without draining the whole system. A magnetic filter on the return line "
                "is mandatory; warranty claims for blocked plate heat exchangers are refused when no "
                "filter was fitted. Flush the existing heating system thoroughly before connecting the "
                "heat pump, because sludge from old radiators quickly fouls the heat exchanger. The "
                "minimum water volume of the heating circuit is forty litres, not counting any part of "
                "the circuit that can be closed by thermostatic valves. If the open volume is smaller, "
                "fit a buffer tank. The system pressure should be between one and two bar when cold. Fill"
                " the system through the filling loop supplied, bleed all radiators and the automatic air"
                " vent on top of the module, and then top up the pressure. Add an inhibitor suitable for "
                "aluminium and copper at the concentration recommended by its manufacturer. Where the "
                "heat pump also heats a domestic hot water cylinder, connect the cylinder coil to the "
                "diverter valve ports marked DHW and fit the cylinder sensor in the pocket at two thirds "
                "of the cylinder height."
            ),
        ),
        (
            "Electrical installation",
            (
                "The electrical installation must be carried out by a qualified electrician and must "
                "follow the wiring regulations that apply at the site. The outdoor unit needs its own "
                "supply from the consumer unit, protected by a twenty amp type C circuit breaker and a "
                "thirty milliamp residual current device of type A or better. Use cable with a cross-"
                "section of at least four square millimetres for runs up to twenty-five metres. The "
                "indoor module takes a separate three amp supply for the controller and the circulation "
                "pump, and a further supply for the backup heater if one is fitted. Connect the "
                "communication cable between the outdoor unit and the indoor module to terminals A and B;"
                " it must be a shielded twisted pair and must not run in the same conduit as mains "
                "cables. The outdoor temperature sensor is mounted on a north facing wall, out of direct "
                "sun and away from windows and vents, at least two metres above the ground. Where the "
                "electricity supplier offers a tariff that can block the heat pump at peak times, connect"
                " the blocking signal to the terminals marked EVU and set the input in the installer "
                "menu. Check the polarity and the earth continuity of every circuit before switching on "
                "for the first time."
            ),
        ),
        (
            "Commissioning",
            (
                "Commissioning must be completed before the heat pump is handed over to the user, and the"
                " commissioning checklist at the back of this manual must be signed. First check that the"
                " service valves on the outdoor unit are fully open and that the caps have been refitted."
                " Switch on the supply to the indoor module and wait for the controller to start; it "
                "shows the language selection on the first start. Select the language, the date and the "
                "time, and then enter the installer menu with the code printed on the inside of the front"
                " panel. Set the heating curve to suit the emitters: a slope of 0.4 is a good starting "
                "point for underfloor heating and 0.8 for radiators. Enter the size of the hot water "
                "cylinder if one is connected. Run the venting program for at least twenty minutes, then "
                "check the system pressure again. Now switch on the outdoor unit. The compressor starts "
                "after a delay of up to five minutes, while the controller checks the sensors. Measure "
                "the flow temperature and the temperature difference between flow and return after thirty"
                " minutes of operation; a difference between five and seven kelvin shows that the flow "
                "rate is correct. Finally explain the controls to the user and hand over the user guide."
            ),
        ),
        (
            "Defrost and operation in cold weather",
            (
                "In cold and humid weather ice forms on the outdoor coil, and the heat pump removes it by"
                " reversing the refrigerant cycle for a few minutes. During a defrost the fan stops, the "
                "unit may release a cloud of steam and the heating output pauses. This is normal, and the"
                " controller shows a snowflake symbol while it happens. The number of defrost cycles "
                "depends on the outdoor temperature and the humidity; around zero degrees with high "
                "humidity, a defrost every forty minutes is common. Make sure the melt water can drain "
                "freely, because ice that builds up under the unit can block the coil from below. The "
                "HP-40 delivers its rated output down to minus seven degrees and keeps working down to "
                "minus twenty-five degrees, with reduced output. Below the design temperature, the backup"
                " heater can cover the difference if it is enabled in the installer menu. Avoid setting "
                "the backup heater to start too early, as it uses three times as much electricity for the"
                " same heat. If the outdoor unit is in a very exposed location, a wind shield on the "
                "windward side reduces defrost cycles, but it must not restrict the airflow."
            ),
        ),
        (
            "Maintenance schedule",
            (
                "An annual service keeps the heat pump efficient and is a condition of the extended "
                "warranty. At each service, clean the outdoor coil with a soft brush or a low pressure "
                "water spray from the inside outwards, and straighten bent fins with a fin comb. Check "
                "that the condensate drain is clear. Clean the magnetic filter on the return line and "
                "record the amount of debris found; a large amount suggests that the system needs another"
                " flush. Check the system pressure and the pre-charge of the expansion vessel, which "
                "should be one bar with the system drained. Inspect all electrical connections for signs "
                "of overheating and tighten the terminals in the outdoor unit. Read the fault history "
                "from the controller and note any recurring codes. Every two years, test the inhibitor "
                "concentration in the heating water. Refrigerant leak checks are required by law at "
                "intervals that depend on the charge and the refrigerant; for the HP-40 with its standard"
                " charge, no periodic leak check is required, but a check must be made whenever the "
                "circuit has been opened. Record every service in the log book supplied with the unit, "
                "including the name of the engineer and the readings taken."
            ),
        ),
        (
            "Fault codes and troubleshooting",
            (
                "When the controller detects a fault, it shows a code on the display and records it in "
                "the fault history. Code E01 means that the communication between the outdoor unit and "
                "the indoor module has been lost; check the cable and the terminals A and B. Code E03 "
                "means low water pressure; top up the system and look for leaks. Code E05 shows a flow "
                "rate that is too low, which is usually caused by a blocked filter, a closed valve or air"
                " in the circuit. Code E11 refers to a fault of the outdoor temperature sensor, and code "
                "E14 to a high discharge temperature of the compressor, which may indicate a lack of "
                "refrigerant. Code E21 appears when the defrost has failed three times in a row; check "
                "that the coil is not blocked by snow or leaves. Some faults clear themselves when the "
                "cause disappears, while others must be reset in the installer menu. Do not reset a fault"
                " repeatedly without finding its cause, because repeated restarts can damage the "
                "compressor. If a fault cannot be resolved with the steps in this section, contact "
                "Northwind technical support with the serial number of both units and the fault history."
            ),
        ),
        (
            "Technical data",
            (
                "The nominal heating output of the HP-40 is 4.2 kW at an outdoor temperature of seven "
                "degrees and a flow temperature of thirty-five degrees, with a coefficient of performance"
                " of 4.9. At minus seven degrees and the same flow temperature, the output is 3.9 kW. The"
                " maximum flow temperature is sixty-five degrees with the compressor alone. The outdoor "
                "unit measures 950 by 780 by 380 millimetres and weighs eighty-four kilograms empty. The "
                "indoor hydraulic module measures 700 by 450 by 300 millimetres and weighs thirty-one "
                "kilograms empty. The rated water flow is 720 litres per hour, and the integrated "
                "circulation pump can deliver a head of up to seven metres. The backup heater has three "
                "stages of three, six and nine kilowatts. The unit carries an energy label of class A+++ "
                "for low temperature applications and A++ for medium temperature applications. The design"
                " life of the outdoor unit is at least fifteen years when it is serviced as described in "
                "this manual. Spare parts remain available for ten years after the end of production. The"
                " declaration of conformity can be downloaded from the Northwind website using the serial"
                " number on the rating plate."
            ),
        ),
    ],
)

TRAVEL = (
    "Travel and Expense Policy",
    [
        (
            "Purpose and scope",
            (
                "This policy explains how employees of Brightwater Analytics plan business travel, book "
                "transport and accommodation, and claim back the costs they incur while working away from"
                " their normal place of work. It applies to all permanent and fixed-term employees, to "
                "contractors whose contracts refer to it, and to candidates who travel to interviews at "
                "the company's request. The policy aims to keep travellers safe, to treat everyone fairly"
                " and to spend the company's money as carefully as if it were our own. It does not cover "
                "relocation, which has its own policy, or the travel of board members, which the "
                "remuneration committee sets. Managers are responsible for approving travel that is "
                "necessary and for checking that claims are reasonable. Travellers are responsible for "
                "following the booking rules, keeping receipts and submitting accurate claims on time. "
                "The finance team administers the policy, answers questions and reports on travel "
                "spending every quarter. Where this policy does not cover a situation, use your "
                "judgement, ask yourself whether the cost would look reasonable to a customer or a "
                "shareholder, and speak to your manager before you commit to the expense. Repeated or "
                "deliberate breaches of the policy may lead to disciplinary action."
            ),
        ),
        (
            "Before you travel",
            (
                "Travel should only take place when the purpose of the trip cannot reasonably be achieved"
                " by a video call. Before you book anything, agree the purpose, the dates and the "
                "estimated cost with your manager and record the approval in the travel request form. "
                "International trips also need the approval of your department head, and trips to "
                "countries that are on the company's high risk list need the additional approval of the "
                "security team at least two weeks before departure. Check whether you need a visa or a "
                "work permit for the destination, and allow enough time to obtain it; the company pays "
                "visa fees for business trips. Make sure that your passport is valid for at least six "
                "months after your return date. Register your trip with the travel assistance service, "
                "which provides medical and security support around the clock. Read the country briefing "
                "that the service sends you, and update your emergency contact details in the HR system. "
                "If you have a medical condition that might be affected by travel, speak to occupational "
                "health before you go. Remember that you may need vaccinations for some destinations, and"
                " that these sometimes require several weeks between doses."
            ),
        ),
        (
            "Booking transport",
            (
                "All flights, rail tickets and car hire must be booked through the company's travel "
                "management company, either online through the booking tool or by telephone. Bookings "
                "made elsewhere will only be reimbursed in exceptional cases, for example when the "
                "booking tool is unavailable and the journey cannot wait. Book economy class for flights "
                "of up to six hours. For longer flights, premium economy may be booked with the approval "
                "of your department head, and business class is only available for flights of more than "
                "ten hours or where a medical reason is documented by occupational health. Choose the "
                "lowest logical fare, which is the cheapest fare that fits reasonably with the purpose of"
                " the trip, and book at least fourteen days ahead where you can. Rail is preferred to air"
                " for journeys of less than four hours. Standard class is the norm for rail travel, but "
                "first class may be booked for journeys of more than two hours when you need to work on "
                "the train. Taxis are allowed when public transport is not practical, for example late at"
                " night, when you carry heavy equipment or when travelling together makes a taxi cheaper."
                " Use pool cars before hiring a car, and return hired cars with a full tank to avoid "
                "refuelling charges."
            ),
        ),
        (
            "Accommodation",
            (
                "Hotels must also be booked through the travel management company, which has negotiated "
                "rates with hotels near our offices and our main customers. The nightly limit for the "
                "room, excluding breakfast and taxes, is 140 pounds in London, 110 pounds elsewhere in "
                "the United Kingdom and the amount set for each city in the international rate table on "
                "the intranet. If no room is available within the limit, the booking tool shows the "
                "cheapest suitable alternative and records the reason. Choose a hotel that allows you to "
                "reach your meetings easily and safely, and avoid hotels that the travel assistance "
                "service has advised against. Staying with friends or family is allowed, and in that case"
                " you may claim a flat rate of twenty-five pounds per night towards their costs, without "
                "receipts. Rented apartments may be booked for stays of more than a week when they are "
                "cheaper than a hotel. Cancel bookings that you no longer need as early as possible, "
                "because no-show charges will not be reimbursed unless the cancellation was outside your "
                "control. Room upgrades, minibar items, films and spa treatments are personal costs and "
                "must be paid by the traveller on departure."
            ),
        ),
        (
            "Meals and subsistence",
            (
                "When you travel on business you may claim the reasonable cost of meals that you would "
                "not otherwise have had to pay for. The daily limits are twelve pounds for breakfast when"
                " it is not included in the room rate, eighteen pounds for lunch and thirty-five pounds "
                "for dinner, including drinks and service. Limits for international travel are set in the"
                " international rate table. The limits are not allowances; you can only claim what you "
                "actually spent, and receipts are required. Alcohol may be claimed with an evening meal "
                "up to a reasonable amount, but not on its own. When you entertain customers or partners,"
                " the most senior employee present pays and claims the whole bill, listing the names and "
                "organisations of all guests. Entertainment above fifty pounds per person needs the prior"
                " approval of your department head. Meals on flights and trains that are included in the "
                "fare cannot be claimed again. If you attend a conference or an event where meals are "
                "provided, you cannot claim for the same meal elsewhere. Personal items such as "
                "toiletries, clothing, books, newspapers and laundry for trips of less than five nights "
                "are not reimbursed."
            ),
        ),
        (
            "Using your own car",
            (
                "You may use your own car for business journeys when it is cheaper than the alternatives "
                "or when public transport is not practical. Before you do, you must have business use "
                "cover on your car insurance, a valid driving licence and a current roadworthiness "
                "certificate where one is required, and you must record these in the HR system every "
                "year. Mileage is reimbursed at forty-five pence per mile for the first ten thousand "
                "business miles in the tax year and twenty-five pence per mile after that, with an "
                "additional five pence per mile for each colleague who travels with you. You cannot claim"
                " for the journey between your home and your normal place of work, and when you travel "
                "from home to another location you may only claim the distance that exceeds your normal "
                "commute. Parking and tolls incurred on business journeys may be claimed with receipts, "
                "but fines for parking or driving offences are always the personal responsibility of the "
                "driver. Drive safely, follow the law and take a break of at least fifteen minutes every "
                "two hours. Do not drive for business after a long-haul flight or a working day of more "
                "than twelve hours; book a hotel or a taxi instead."
            ),
        ),
        (
            "Claiming expenses",
            (
                "All business expenses are claimed through the expense system, which you can use on a "
                "computer or on the mobile app. Photograph each receipt when you receive it and attach "
                "the image to the claim line; the original paper receipt does not need to be kept once "
                "the image is clear and complete. Each claim line must show the date, the amount, the "
                "currency, the category and the business purpose. Where a receipt is lost, complete a "
                "missing receipt declaration, which your manager must approve; more than three missing "
                "receipts in a year will be reviewed by finance. Expense claims must be submitted within "
                "30 calendar days of the last day of travel; claims filed later need written approval "
                "from a director. Claims are approved by your manager, checked by the finance team and "
                "paid with the next weekly payment run after approval. Costs in foreign currencies are "
                "converted at the rate on your card statement, or, for cash, at the rate shown in the "
                "expense system for the day of the purchase. Do not split a single expense into several "
                "claims to stay within a limit, and do not claim an expense that has been or will be "
                "reimbursed by a customer or a third party. Finance carries out random audits of claims "
                "every month."
            ),
        ),
        (
            "Corporate cards and cash advances",
            (
                "Employees who travel more than four times a year are offered a corporate credit card, "
                "which is the preferred way to pay for business expenses. The card is issued in your "
                "name, but the company pays the balance each month once your expense claims have been "
                "approved. It must not be used for personal purchases, even if you intend to repay them. "
                "Card transactions appear in the expense system automatically, and you must match each "
                "transaction with a receipt and a business purpose within the same deadline that applies "
                "to other claims. Lost or stolen cards must be reported to the card provider immediately "
                "and to the finance team on the next working day. Employees who do not have a corporate "
                "card may request a cash advance for trips of more than three days, up to seventy-five "
                "percent of the estimated cost. The advance is deducted from the expense claim for the "
                "trip, and any balance that is not covered by receipts is deducted from your next salary "
                "payment. Cash withdrawals with the corporate card are limited to two hundred pounds a "
                "week and are only allowed in countries where cards are not widely accepted."
            ),
        ),
        (
            "Safety and wellbeing while travelling",
            (
                "Your safety is more important than any meeting. If you feel unsafe at any point during a"
                " trip, leave the situation and contact the travel assistance service, which can arrange "
                "alternative transport or accommodation at short notice. Keep your phone charged and "
                "carry the assistance number with you. Do not share your travel plans on social media "
                "while you are away. Use hotel safes for passports and valuables, and carry only the cash"
                " and cards that you need for the day. When you travel on work to countries with a "
                "different time zone, allow yourself time to recover before you work long hours or drive."
                " The company's working time rules apply during travel: time spent travelling outside "
                "normal hours counts as working time for the purposes of rest breaks, and your manager "
                "should agree time off in lieu for long journeys at weekends. Report any accident, "
                "illness, theft or security incident to the travel assistance service and to your manager"
                " as soon as you can. If you need medical treatment abroad, the company's travel "
                "insurance covers the cost; keep all documents and do not pay large bills yourself "
                "without first contacting the insurer's helpline."
            ),
        ),
        (
            "Sustainability",
            (
                "Travel accounts for more than a third of Brightwater's carbon emissions, and the company"
                " has committed to reducing travel emissions by half by 2030. Before you travel, ask "
                "whether a meeting could take place online or be combined with another trip. Choose rail "
                "over air where the journey takes less than four hours, and choose direct flights over "
                "connections, because take-off and landing use the most fuel. Economy seats have a much "
                "smaller carbon footprint per passenger than business class seats. When you hire a car, "
                "choose an electric or hybrid model where one is available, and share journeys with "
                "colleagues where you can. The booking tool shows the estimated emissions of each option,"
                " and department heads receive a monthly report of the emissions of their teams' travel. "
                "Hotels that hold a recognised sustainability certificate are marked in the booking tool "
                "and should be preferred when the cost is similar. The company offsets the emissions of "
                "all business flights through certified projects, but offsetting is no substitute for "
                "travelling less. Ideas for reducing travel are welcome, and the sustainability team "
                "reviews suggestions every quarter."
            ),
        ),
        (
            "Exceptions and contacts",
            (
                "Exceptions to this policy may be approved in advance by a director when there is a clear"
                " business reason, for example when a customer requires a particular hotel, or when an "
                "employee's disability means that a more expensive option is needed. Reasonable "
                "adjustments for disabled employees are always approved, and you do not need to explain "
                "the details of your condition to your manager; occupational health can confirm the need."
                " Record the reason for every exception in the travel request form. Questions about this "
                "policy should go to the finance helpdesk, which answers within one working day. "
                "Questions about bookings go to the travel management company, whose contact details are "
                "on the intranet. The travel assistance service is available at any time on the number "
                "printed on the back of your corporate card and in the travel section of the intranet. "
                "This policy is reviewed every year by the finance director and the head of people. The "
                "version on the intranet is the only valid version; printed copies may be out of date. "
                "This version was approved on 1 July and replaces all earlier versions of the travel and "
                "expense policy."
            ),
        ),
    ],
)

MINUTES = (
    "Minutes of the Board Meeting, Third Quarter",
    [
        (
            "Attendance and opening",
            (
                "The meeting was held at the head office in Manchester and by video link on 24 October, "
                "starting at ten o'clock. Present were the chair, Margaret Ellison, the chief executive, "
                "David Okafor, the chief financial officer, Priya Raman, the chief operating officer, Tom"
                " Whitfield, and the non-executive directors Helen Baxter, Samuel Greene and Ingrid "
                "Larsen. The company secretary, Paul Dunmore, took the minutes. The head of logistics, "
                "Rachel Ames, attended for the item on the distribution network, and the head of people, "
                "Carlos Mendes, attended for the item on the staff survey. Apologies were received from "
                "the non-executive director Alan Cho, who had sent his comments on the papers in writing "
                "beforehand. The chair confirmed that the meeting was quorate. No new conflicts of "
                "interest were declared; Samuel Greene reminded the board of his existing interest as a "
                "director of a packaging supplier, which was recorded in the register, and it was agreed "
                "that he would take no part in any decision about packaging contracts. The chair welcomed"
                " Ingrid Larsen to her first meeting following her appointment in September and thanked "
                "the executive team for the quality of the papers, which had been circulated a full week "
                "before the meeting."
            ),
        ),
        (
            "Minutes of the previous meeting and matters arising",
            (
                "The minutes of the meeting held on 18 July were approved as a correct record and signed "
                "by the chair. The board reviewed the action log. The review of the treasury policy had "
                "been completed and would be presented to the audit committee in November. The proposal "
                "to move the annual strategy day to February had been accepted by all directors, and the "
                "company secretary would circulate a date. The action on supplier payment terms remained "
                "open: the chief financial officer reported that the company now paid ninety-one percent "
                "of small suppliers within thirty days, up from eighty-four percent in the previous "
                "quarter, but that the target of ninety-five percent had not yet been reached. She "
                "expected to reach it by the end of the year once the new purchase-to-pay system was "
                "fully live. The chief operating officer confirmed that the fire safety improvements at "
                "the Bristol site had been completed and signed off by the insurer's surveyor. The action"
                " to review the board's own effectiveness would be taken forward by the senior "
                "independent director, who would speak to each director individually before Christmas and"
                " report back at the February meeting."
            ),
        ),
        (
            "Chief executive's report",
            (
                "The chief executive presented his report. Trading in the third quarter had been stronger"
                " than expected, with revenue of 48.2 million pounds, six percent above the same quarter "
                "last year and two percent above budget. The growth came mainly from the online channel, "
                "where orders had risen by fourteen percent, while sales through wholesale partners were "
                "flat. Gross margin had improved by half a percentage point as the price increases agreed"
                " in the spring took effect and freight costs eased. He highlighted three concerns. "
                "First, two large wholesale customers had signalled that they would review their ranges "
                "in the new year, and the sales team was preparing proposals to protect the listings. "
                "Second, recruitment of warehouse staff remained difficult in the south east, where "
                "agency rates had risen by eleven percent. Third, the project to replace the warehouse "
                "management system was running behind schedule. The board discussed the dependence on the"
                " two wholesale customers, which together accounted for nineteen percent of revenue, and "
                "asked the executive team to present a plan to reduce this concentration at the strategy "
                "day. The chief executive also reported that the customer satisfaction score had reached "
                "its highest level since records began, at eighty-seven points."
            ),
        ),
        (
            "Financial report",
            (
                "The chief financial officer presented the management accounts for the quarter. Operating"
                " profit was 4.1 million pounds against a budget of 3.7 million pounds. Cash at the end "
                "of September stood at 12.6 million pounds, and the revolving credit facility remained "
                "undrawn. Capital expenditure of 2.9 million pounds in the quarter related mainly to the "
                "new distribution centre and the warehouse management system. She explained that working "
                "capital had increased because stock had been built ahead of the peak trading season, and"
                " that she expected it to fall again in January. The full year forecast had been raised "
                "to an operating profit of 15.8 million pounds, although the forecast assumed that the "
                "peak season would be in line with last year. The board discussed the sensitivity of the "
                "forecast to consumer demand in December and asked for a downside scenario to be "
                "circulated before the November audit committee. The auditors had confirmed their plan "
                "for the year-end audit, with the main areas of focus being stock valuation, the "
                "capitalisation of software development costs and the accounting for the new lease at the"
                " distribution centre. The board noted the financial report and approved the revised "
                "forecast."
            ),
        ),
        (
            "Distribution network and the Leeds project",
            (
                "The head of logistics joined the meeting and presented an update on the distribution "
                "network. The new automated picking line at the Bristol site had been running for six "
                "weeks and had increased the number of orders picked per hour by thirty percent, with "
                "error rates falling below one in five thousand. The project to open a second "
                "distribution centre in the north, serving customers in the north of England and "
                "Scotland, was progressing, but not as fast as planned. The building had been handed over"
                " by the landlord in August, and the fit-out of the offices and the loading bays was "
                "complete. The Leeds distribution centre is now expected to open on 14 March, six weeks "
                "later than planned, because the racking supplier missed its delivery window. The delay "
                "would not affect the peak season, as the northern volumes would continue to be served "
                "from Bristol until the opening. The cost of the delay, mainly rent and the salaries of "
                "staff already recruited, was estimated at 310 thousand pounds, and the head of logistics"
                " was negotiating compensation from the racking supplier under the contract. The board "
                "asked whether the new date was firm; she replied that the supplier had confirmed its new"
                " delivery in writing and that installation would take five weeks."
            ),
        ),
        (
            "Warehouse management system",
            (
                "The chief operating officer reported on the project to replace the warehouse management "
                "system. The original plan had been to go live at Bristol in September, but testing had "
                "revealed problems with the interface to the carriers' systems, which had to be "
                "redesigned. The go-live had been moved to late January, after the peak season, which the"
                " board agreed was the right decision. The project budget of 4.5 million pounds was still"
                " expected to be sufficient, although the contingency had been reduced to 180 thousand "
                "pounds. The board questioned whether the team had the right skills to manage the "
                "integration and asked whether external assurance should be commissioned. After "
                "discussion it was agreed that the internal audit team would carry out a review of the "
                "project's governance and testing in November and report to the audit committee. Helen "
                "Baxter asked that the board be given a clear set of criteria for deciding whether the "
                "system was ready to go live, so that the decision in January could be taken on the basis"
                " of evidence rather than the pressure of the timetable. The chief operating officer "
                "agreed to bring the criteria to the December meeting for approval."
            ),
        ),
        (
            "Staff survey and people",
            (
                "The head of people presented the results of the annual staff survey, which had been "
                "completed by seventy-eight percent of employees, the highest response rate so far. "
                "Overall engagement had risen from sixty-six to seventy-one percent. Employees rated the "
                "company highly on safety, on the support given by their line managers and on the "
                "company's values. The lowest scores related to pay, to career development and, in the "
                "warehouses, to the communication of changes to shift patterns. The board discussed the "
                "findings at length. Ingrid Larsen asked how the company compared with others in the "
                "sector; the head of people said that engagement was about five points above the sector "
                "benchmark, but that scores for career development were below it. The executive team "
                "proposed three actions: a new development programme for team leaders, a review of the "
                "pay structure in the warehouses to be completed before the April pay round, and regular "
                "briefings by the site managers before any change to shift patterns. The board supported "
                "the actions and asked for a progress report in six months. The chair thanked the head of"
                " people and asked that the board's thanks be passed on to all staff for their work "
                "during a busy year."
            ),
        ),
        (
            "Health and safety",
            (
                "The chief operating officer presented the health and safety report. There had been two "
                "reportable injuries in the quarter, both at the Bristol site: a member of staff had "
                "injured a shoulder while lifting a heavy parcel, and an agency worker had suffered a cut"
                " to the hand from a packing knife. Both had been investigated, and the actions "
                "identified included additional training in manual handling and a switch to safety knives"
                " with retractable blades across all sites. The lost time injury rate for the rolling "
                "twelve months stood at 0.9 per hundred thousand hours worked, compared with 1.2 a year "
                "earlier. Near miss reporting had increased, which the board welcomed as a sign of a "
                "healthy safety culture. The fire risk assessments for all sites had been updated, and "
                "the fire drills held in September had been completed within the target evacuation times."
                " The board noted the report and asked that the safety plan for the Leeds site be "
                "presented before it opened, including the training of the new staff and the traffic "
                "management plan for the yard, which would be shared with heavy goods vehicles from the "
                "neighbouring business park."
            ),
        ),
        (
            "Risk register",
            (
                "The board reviewed the principal risks. The risk relating to the warehouse management "
                "system had been raised from amber to red because of the delay and the reduced "
                "contingency. The risk of losing a major wholesale customer had been raised to amber. The"
                " cyber security risk remained amber; the chief financial officer reported that the "
                "company had passed its annual external penetration test, with two medium findings that "
                "had since been fixed, and that all staff had completed the phishing awareness training. "
                "A new risk had been added relating to the supply of recycled packaging, where prices had"
                " risen sharply and one supplier had warned of shortages in the first quarter. Samuel "
                "Greene left the room for this part of the discussion in line with his declared interest."
                " The executive team was asked to confirm that alternative suppliers had been identified."
                " The board agreed that the risk appetite for supply chain disruption should be discussed"
                " at the strategy day, in the light of the experience of the last three years. The audit "
                "committee would carry out a deep dive into the cyber security risk at its February "
                "meeting, with a presentation from the external security adviser."
            ),
        ),
        (
            "Governance and other business",
            (
                "The company secretary presented proposed changes to the terms of reference of the "
                "remuneration committee, which brought them in line with the latest governance code. The "
                "board approved the changes. The board approved the appointment of Ingrid Larsen as a "
                "member of the audit committee with effect from 1 November. The chair reported that the "
                "search for a new non-executive director with digital experience had produced a shortlist"
                " of four candidates, who would be interviewed by the nominations committee in November. "
                "The board noted the register of directors' interests and the schedule of board meetings "
                "for the next year, which had been circulated with the papers. Under any other business, "
                "the chief executive informed the board that the company had been shortlisted for a "
                "national award for its work on reducing packaging waste, with the result to be announced"
                " in December. Helen Baxter asked that future board papers include a short summary of the"
                " customer complaints received in the quarter, and the chief operating officer agreed to "
                "add it. There being no further business, the chair closed the meeting at twenty minutes "
                "past two. The next meeting will be held on 12 December in Bristol, including a visit to "
                "the new picking line."
            ),
        ),
        (
            "Summary of actions",
            (
                "The following actions were agreed at the meeting. The chief financial officer will "
                "circulate a downside scenario for the full year forecast before the November audit "
                "committee, and will report on the progress towards paying ninety-five percent of small "
                "suppliers within thirty days. The executive team will present a plan to reduce the "
                "dependence on the two largest wholesale customers at the strategy day in February. The "
                "head of logistics will report on the negotiation of compensation from the racking "
                "supplier and will present the safety plan for the Leeds site before it opens. The "
                "internal audit team will review the governance and testing of the warehouse management "
                "system project in November and report to the audit committee. The chief operating "
                "officer will bring the go-live criteria for the warehouse management system to the "
                "December meeting for approval and will add a summary of customer complaints to the board"
                " papers. The head of people will report on the progress of the staff survey actions in "
                "six months. The executive team will confirm that alternative suppliers of recycled "
                "packaging have been identified. The senior independent director will complete the review"
                " of board effectiveness and report in February."
            ),
        ),
    ],
)

RUNBOOK = (
    "Billing Service - Release and Deployment Runbook",
    [
        (
            "Purpose",
            (
                "This runbook describes how the billing service is released to production, how a release "
                "is verified and what to do when something goes wrong. It is written for the engineers on"
                " the billing team and for the on-call engineer of the platform team, who may have to act"
                " on a release outside office hours. The billing service calculates invoices, collects "
                "payments through the payment provider and sends the results to the finance ledger, so "
                "mistakes in a release can cost customers money and take days to correct. For this reason"
                " releases follow a fixed process, and shortcuts need the approval of the team lead. The "
                "runbook is kept in the repository next to the code, and every change to the release "
                "process must update it in the same pull request. If you find that a step no longer "
                "matches reality, fix the runbook first and then continue. The commands in this document "
                "assume that you are logged in to the release host with your own account and that your "
                "account is a member of the billing-release group. Never run release commands from your "
                "laptop, and never share the credentials of the deploy user. All commands are logged, and"
                " the log is reviewed after every release."
            ),
        ),
        (
            "Release schedule",
            (
                "Regular releases happen on Tuesdays and Thursdays between ten in the morning and two in "
                "the afternoon, when the team is at work and the volume of payments is moderate. No "
                "releases are made in the last three working days of a month, because the monthly invoice"
                " run starts on the last working day and the finance team needs a stable system while it "
                "checks the results. No releases are made on Fridays, on public holidays or on the day "
                "before a public holiday. Urgent fixes for incidents may be released at any time with the"
                " approval of the incident commander, but they still follow the steps in this runbook, "
                "and the reason for the exception is recorded in the release ticket. Each release is "
                "announced in the billing channel at least one hour in advance, with a link to the "
                "release ticket and the list of changes. The finance operations team is told of any "
                "release that changes how invoices are calculated or presented, and such releases need "
                "their written approval in the ticket. A release may contain several merged pull "
                "requests, but the team prefers small releases that can be understood and reverted "
                "easily; a release with more than ten pull requests needs the approval of the team lead."
            ),
        ),
        (
            "Preparing a release",
            (
                "Start by creating a release ticket from the template and filling in the list of changes,"
                " the expected impact and the verification steps. Make sure that the main branch is green"
                " in the continuous integration pipeline, including the integration tests against the "
                "payment provider's sandbox, which run once an hour. Create the release tag from the main"
                " branch with the release script, which bumps the version, writes the changelog and "
                "pushes the tag. The pipeline then builds the container image, signs it and pushes it to "
                "the registry. Check that the image has passed the vulnerability scan; images with "
                "critical findings cannot be deployed, and high findings need a note in the ticket "
                "explaining why they are acceptable. If the release contains database migrations, review "
                "each migration with a second engineer and check that it can run without locking the "
                "invoices table for more than a few seconds. Large data changes must be written as "
                "background jobs, not as migrations. Check the migration against a copy of the production"
                " database in the staging environment, and record how long it took. Finally, check the "
                "dashboards for the payment provider's status and for any ongoing incident; do not start "
                "a release while another incident is open."
            ),
        ),
        (
            "Deploying to staging",
            (
                "Every release is deployed to the staging environment before it goes to production. "
                "Deploy it with the deploy command on the release host, giving the environment and the "
                "tag. The command applies any database migrations first and then updates the services one"
                " at a time. Wait for all pods to become ready and for the smoke tests to pass; the smoke"
                " tests create a test customer, issue an invoice, take a payment with a sandbox card and "
                "check that the result reaches the ledger stub. Then run the manual verification steps "
                "listed in the release ticket. For changes that affect invoice calculation, run the "
                "invoice comparison job, which recalculates last month's invoices for a sample of five "
                "hundred customers with the new code and compares them with the stored invoices. Any "
                "difference must be explained in the ticket before the release continues. Leave the "
                "release in staging for at least one hour while the synthetic traffic runs, and check the"
                " error rate and the latency on the staging dashboard. If anything fails, stop, fix the "
                "problem on the main branch and create a new tag. Never patch a release in place in "
                "staging, because the same artefact must be tested and deployed."
            ),
        ),
        (
            "Deploying to production",
            (
                "Production deployments use the same deploy command with the production environment. The "
                "command asks for confirmation and shows the list of migrations that will run. Production"
                " uses a canary release: the new version first receives five percent of the traffic, then"
                " twenty-five percent after ten minutes and all traffic after a further twenty minutes, "
                "provided that the error rate and the latency stay within the limits set in the "
                "deployment configuration. If a limit is exceeded, the deployment stops automatically and"
                " routes all traffic back to the old version. Watch the production dashboard throughout "
                "the canary phase and keep the billing channel updated with the progress. Payment "
                "webhooks from the provider are processed by a separate worker pool that is updated after"
                " the web services; the deploy command waits until the queue of webhooks has drained "
                "below one hundred messages before it restarts the workers, so that no webhook is "
                "processed twice. When the deployment has completed, run the production smoke test, which"
                " uses an internal test account and a real payment of one penny that is refunded "
                "automatically. Record the completion time in the ticket and announce the release in the "
                "channel."
            ),
        ),
        (
            "Verifying a release",
            (
                "A release is not finished until it has been verified in production. Check that the "
                "version shown on the service status page matches the release tag. Look at the error "
                "rate, the latency of the invoice and payment endpoints and the rate of failed payments "
                "on the production dashboard, and compare them with the same period of the previous week."
                " A rise in failed payments is the most important warning sign, because it can be caused "
                "by a change in the way requests are sent to the payment provider. Check that events are "
                "reaching the finance ledger by looking at the ledger lag metric, which should stay below"
                " two minutes. For releases that change invoices, check a handful of invoices generated "
                "after the release by hand and ask the finance operations team to confirm them. Keep "
                "watching the dashboards for at least thirty minutes after the deployment. If a problem "
                "appears later in the day, it is usually quicker to roll back the release than to fix "
                "forward, unless the fix is small and well understood. Close the release ticket when you "
                "are satisfied, with a note of any follow-up work. The on-call engineer should be told "
                "about the release before the end of the working day."
            ),
        ),
        (
            "Rolling back",
            (
                "Roll back a release as soon as you suspect that it causes customer-facing problems; you "
                "can investigate afterwards. To roll back the application, run the deploy command with "
                "the previous release tag, which is listed in the release ticket and in the deployment "
                "history. The canary process is skipped for rollbacks, so the old version receives all "
                "traffic within a few minutes. Application rollbacks are safe as long as the database "
                "schema is compatible with the old version, which is why every migration must be "
                "backwards compatible for one release. Database migrations are not rolled back "
                "automatically. To roll back a failed migration, run make migrate-down STEP=1 from the "
                "release host and confirm the schema version in the admin console before restarting the "
                "workers. Only roll back a migration when it failed part way or when it is itself the "
                "cause of the problem; a migration that succeeded can usually stay in place while the "
                "application is rolled back. Down migrations that would delete data must never be run in "
                "production without the approval of the team lead and a fresh backup. After any rollback,"
                " open an incident, inform the finance operations team and write down the timeline while "
                "you still remember it."
            ),
        ),
        (
            "Incidents during a release",
            (
                "If a release causes an incident, the engineer running the release becomes the incident "
                "commander until someone else takes over. Open an incident in the incident tool, which "
                "creates a channel and pages the on-call engineer of the platform team. The first "
                "priority is to stop the damage: roll back, pause the invoice run or disable the affected"
                " feature with its feature flag. The second priority is to understand which customers "
                "were affected and how. The billing service writes an audit record for every invoice and "
                "payment, and the support team can use these records to find the affected customers. Do "
                "not try to correct customer data by hand in the database; corrections are made with the "
                "correction scripts in the repository, which are reviewed like any other code. "
                "Communicate regularly in the incident channel, at least every thirty minutes, even if "
                "there is nothing new to say. Customer support must be told what to say to customers who "
                "call, and the finance operations team must be told about any invoices or payments that "
                "need to be corrected. When the incident is over, the incident commander writes the "
                "incident report within two working days, and the team holds a blameless review within a "
                "week."
            ),
        ),
        (
            "Feature flags",
            (
                "Most new features in the billing service are released behind feature flags, so that the "
                "code can be deployed before the feature is switched on. Flags are managed in the feature"
                " flag service, and each flag has an owner and an expiry date. A flag can be enabled for "
                "internal test accounts, for a percentage of customers or for named customers, which "
                "allows a feature to be tried with a few friendly customers before it is rolled out to "
                "everyone. Switching a flag is not a release and does not need a release ticket, but it "
                "must be announced in the billing channel and recorded in the flag's history with a "
                "reason. Flags that change how invoices are calculated may only be switched with the "
                "approval of the finance operations team and never during the monthly invoice run. Remove"
                " flags when the feature has been fully rolled out for at least two weeks; old flags make"
                " the code harder to understand and test. The flag service is itself a dependency of the "
                "billing service: if it is unavailable, the billing service uses the last known values "
                "stored in its cache, and it alerts the on-call engineer if the cache is older than one "
                "hour."
            ),
        ),
        (
            "Access and audit",
            (
                "Access to the release host and to the production environment is granted to members of "
                "the billing team after they have completed the release training and shadowed two "
                "releases. Access is reviewed every quarter by the team lead, and leavers lose access on "
                "their last day. Production database access is read only by default; write access is "
                "granted temporarily through the access request tool for a specific task, approved by a "
                "second engineer, and removed automatically after four hours. Every command run on the "
                "release host and every query run against the production database is logged to the audit "
                "system, which the security team reviews. Secrets, such as the payment provider's API "
                "keys, are stored in the secrets manager and are never written to the repository, the "
                "release ticket or the chat channels. If a secret is exposed by mistake, treat it as a "
                "security incident, rotate the secret immediately and inform the security team. Engineers"
                " must use their own accounts for all actions; the deploy user's credentials are only "
                "available to the automation. The audit log is kept for seven years, in line with the "
                "retention rules for financial records."
            ),
        ),
        (
            "Contacts and further reading",
            (
                "The billing team owns the billing service and this runbook. The team lead is the first "
                "contact for questions about the release process and for approvals. The platform team "
                "owns the release host, the deployment tooling and the production clusters, and its on-"
                "call engineer can be paged through the incident tool at any time. The finance operations"
                " team owns the invoice run and the relationship with the finance ledger, and should be "
                "contacted through its shared mailbox or the finance channel. The payment provider's "
                "support line and status page are listed in the vendor section of the wiki. For "
                "background on how the service works, read the architecture document in the repository, "
                "which describes the invoice calculation, the payment flow and the events sent to the "
                "ledger. The incident process is described in the company's incident handbook. New team "
                "members should read this runbook in full, shadow at least two releases, and then run a "
                "release under supervision before they run one alone. Suggestions for improving the "
                "runbook are welcome as pull requests; the team reviews the runbook as a whole every six "
                "months, after the half-yearly disaster recovery exercise."
            ),
        ),
    ],
)

LAB = (
    "Laboratory Safety Handbook - School of Chemistry",
    [
        (
            "Introduction",
            (
                "This handbook sets out the safety rules for everyone who works in the teaching and "
                "research laboratories of the School of Chemistry, including staff, postgraduate "
                "researchers, undergraduate students, visitors and contractors. Chemistry laboratories "
                "contain hazards that can cause serious injury, including toxic and corrosive chemicals, "
                "flammable solvents, compressed gases, high voltages and hot surfaces. Most accidents can"
                " be prevented by planning work carefully, using the right equipment and following the "
                "rules in this handbook. Everyone must read the handbook and sign the declaration on the "
                "last page before they are given access to a laboratory. Supervisors must make sure that "
                "the people they supervise have read it and understood it, and that they receive training"
                " for the specific work they will do. The handbook does not replace the risk assessments "
                "for individual experiments, which must be written before any new procedure is started. "
                "If you are unsure whether something is safe, stop and ask your supervisor or the "
                "laboratory manager. Nobody will criticise you for asking a question, but you may put "
                "yourself and others at risk if you do not. The handbook is reviewed every year by the "
                "school safety committee."
            ),
        ),
        (
            "Responsibilities",
            (
                "The head of school is responsible for safety in the school and delegates the day-to-day "
                "management of safety to the school safety officer and the laboratory managers. Each "
                "research group leader is responsible for the safety of the work in their group, "
                "including risk assessments, training and the supervision of students. The laboratory "
                "managers look after the general condition of the laboratories, the fume cupboards, the "
                "safety equipment and the chemical stores, and they carry out monthly inspections. Every "
                "person working in a laboratory is responsible for their own safety and for the safety of"
                " others who may be affected by their work. This means following the rules, using the "
                "protective equipment provided, reporting hazards and incidents, and not interfering with"
                " safety equipment. Undergraduate students in teaching laboratories are supervised by "
                "academic staff and demonstrators, who must be present at all times while practical work "
                "is in progress. Visitors must be accompanied by a member of staff and must wear the same"
                " protective equipment as everyone else. Contractors who need to work in a laboratory "
                "must obtain a permit to work from the laboratory manager, who will make the area safe "
                "and explain the hazards before work starts."
            ),
        ),
        (
            "General laboratory rules",
            (
                "Do not work alone in a laboratory outside normal working hours, which are eight in the "
                "morning to six in the evening on weekdays. Work outside these hours is only allowed with"
                " the written approval of your group leader, and another person must be within earshot. "
                "Never eat, drink, chew gum, apply cosmetics or store food in a laboratory. Keep "
                "laboratory coats in the laboratory, and do not wear them in offices, corridors or the "
                "cafe. Tie back long hair, avoid loose clothing and wear closed shoes that cover the "
                "whole foot. Keep benches tidy and free from unnecessary chemicals and equipment, and "
                "clean up after yourself at the end of every day. Keep corridors, doorways and the areas "
                "in front of safety showers and fire extinguishers clear at all times. Label every "
                "container with its contents, the hazard, your name and the date, including beakers and "
                "flasks that will only be used for a short time. Never pipette by mouth. Do not use "
                "mobile phones while handling chemicals. Report any damaged equipment to the laboratory "
                "manager and label it clearly so that nobody else uses it. Before you leave the "
                "laboratory, remove your gloves and wash your hands thoroughly."
            ),
        ),
        (
            "Personal protective equipment",
            (
                "Safety glasses with side shields must be worn at all times in the laboratories, by "
                "everyone, even when you are not handling chemicals yourself. Prescription glasses are "
                "not a substitute; wear over-glasses or obtain prescription safety glasses through the "
                "school. Goggles or a face shield must be worn when there is a risk of splashing, for "
                "example when handling corrosive liquids in quantities larger than one hundred "
                "millilitres, or when working with apparatus under pressure or vacuum. A laboratory coat,"
                " fastened to the neck, must be worn for all practical work. Flame-resistant coats are "
                "required when working with pyrophoric materials or large volumes of flammable solvents. "
                "Choose gloves according to the chemicals you are handling, using the glove selection "
                "chart in the appendix; nitrile gloves protect against many chemicals, but they are "
                "permeable to some common solvents such as dichloromethane. Change gloves as soon as they"
                " are contaminated or damaged, and do not touch door handles, keyboards or telephones "
                "with gloved hands. Contact lenses may be worn under safety glasses, but you should tell "
                "the first aiders in your area that you wear them. Protective equipment is provided free "
                "of charge by the school."
            ),
        ),
        (
            "Handling and storing chemicals",
            (
                "Before you use a chemical for the first time, read its safety data sheet and make sure "
                "that your risk assessment covers it. Buy the smallest amount that you need, and check "
                "whether the chemical is already available in the school's inventory before you order it."
                " All chemicals must be recorded in the inventory system when they arrive, and the "
                "barcode label must stay on the container. Store chemicals according to their hazard "
                "class in the cabinets provided: flammable liquids in the fire-resistant cabinets, acids "
                "and bases in separate ventilated cabinets, and oxidisers away from flammable and organic"
                " materials. The amount of flammable liquid kept outside the cabinets in a laboratory "
                "must not exceed fifty litres. Never store chemicals on the floor, on high shelves or in "
                "fume cupboards that are used for work. Highly toxic substances, carcinogens and "
                "controlled drugs are kept in locked stores, and their use is recorded in a log book. "
                "Transport chemicals between laboratories in secondary containers or bottle carriers, and"
                " use the goods lift for large quantities. Dispose of chemicals that are no longer needed"
                " through the waste service rather than keeping them in the laboratory for years."
            ),
        ),
        (
            "Fume cupboards",
            (
                "Any work that may release toxic, corrosive, flammable or malodorous gases, vapours or "
                "dusts must be carried out in a fume cupboard. Before you start, check that the airflow "
                "indicator shows a normal reading and that the cupboard has been tested within the last "
                "fourteen months; the test date is on the label on the front. Work at least fifteen "
                "centimetres inside the sash, and keep the sash as low as possible, never above the "
                "marked maximum working height. Do not put your head inside the fume cupboard. Keep the "
                "cupboard uncluttered, because bottles and equipment disturb the airflow and reduce the "
                "protection. Large pieces of equipment should be raised on blocks so that air can flow "
                "underneath. If the airflow alarm sounds, stop work, close the sash and inform the "
                "laboratory manager; do not silence the alarm and carry on. Fume cupboards are not "
                "storage cabinets, and chemicals that are not in use must be returned to the correct "
                "store at the end of the day. Perchloric acid must only be used in the specially designed"
                " washdown fume cupboard in room 2.14. Report any unusual smell in the laboratory, as it "
                "may indicate that a fume cupboard is not working properly."
            ),
        ),
        (
            "Emergency procedures",
            (
                "Learn where the nearest fire alarm call point, fire extinguishers, fire blanket, safety "
                "shower, eyewash station, first aid box and spill kit are before you start work in any "
                "laboratory. When the fire alarm sounds, stop work, turn off gas and electrical equipment"
                " if it is safe to do so, close the sash of your fume cupboard and leave the building by "
                "the nearest exit. Do not use the lifts, and do not return to the building until the fire"
                " wardens say that it is safe. In the event of a small fire, use an extinguisher only if "
                "you have been trained and you have a clear escape route behind you. If your clothing "
                "catches fire, stop, drop and roll, or use the safety shower. If a chemical splashes into"
                " your eyes, rinse them at the nearest eyewash station for at least fifteen minutes while"
                " holding the eyelids open, then report to first aid. For chemical splashes on the skin, "
                "remove contaminated clothing and rinse the skin with plenty of water for at least "
                "fifteen minutes. Call the university's emergency number for any serious injury, giving "
                "the building, the room number and the nature of the emergency, and send someone to meet "
                "the ambulance at the main entrance."
            ),
        ),
        (
            "Spills",
            (
                "Small spills of less than one hundred millilitres of a low hazard liquid can be cleaned "
                "up by the person who caused them, wearing suitable gloves and eye protection, using the "
                "absorbent material in the spill kit. Larger spills, spills of highly toxic or volatile "
                "chemicals and any spill that you are not confident to deal with must be treated as an "
                "emergency. Warn the people around you, leave the laboratory, close the door and call the"
                " laboratory manager or, outside working hours, the security control room. Do not try to "
                "be a hero. Spills of mercury, for example from a broken thermometer, must be cleaned up "
                "with the mercury spill kit, never with a vacuum cleaner. Spills of concentrated acids "
                "and bases should be neutralised with the neutralising agents in the spill kit before "
                "they are absorbed. Put the used absorbent in a sealed bag, label it with the name of the"
                " chemical and dispose of it as hazardous waste. Report every spill, however small, "
                "through the online incident form, because the reports help the safety committee to spot "
                "patterns and improve procedures. Replace the materials you used from the spill kit, or "
                "tell the laboratory manager so that the kit can be restocked."
            ),
        ),
        (
            "Waste disposal",
            (
                "Chemical waste must never be poured down the sink, with the exception of small "
                "quantities of dilute, non-hazardous aqueous solutions listed in the appendix. Collect "
                "solvent waste in the labelled containers provided, keeping halogenated and non-"
                "halogenated solvents separate, because they are disposed of by different methods and "
                "mixing them greatly increases the cost. Do not fill waste containers to more than eighty"
                " percent of their capacity, and keep them closed when you are not adding waste. Solid "
                "chemical waste, contaminated gloves and paper towels go in the yellow bins, and sharps, "
                "including broken glass and needles, go in the rigid sharps containers. Clean glassware "
                "that is broken goes in the glass bins, not in the general waste, to protect the "
                "cleaners. Waste that contains heavy metals, cyanides, peroxides or other reactive "
                "substances must be collected separately and labelled in full; ask the laboratory manager"
                " before you start work that will produce such waste. The waste service collects full "
                "containers from the collection point on the ground floor every Wednesday. Complete the "
                "waste form for every container, giving the approximate composition, because the "
                "contractor will refuse containers with unknown contents."
            ),
        ),
        (
            "Compressed gases and cryogenic liquids",
            (
                "Gas cylinders must be secured to a wall or bench with a chain or strap at all times, "
                "including when they are empty. Move cylinders only with a cylinder trolley, with the "
                "valve protection cap fitted. Use the correct regulator for each gas, and never use "
                "grease or oil on the fittings of an oxygen cylinder. Toxic and flammable gases are "
                "supplied from cylinders kept in ventilated gas cabinets outside the laboratories, and "
                "the gas detectors in the laboratories must be tested every six months. Leak-test new "
                "connections with leak detection fluid, never with a flame. Liquid nitrogen and other "
                "cryogenic liquids can cause severe cold burns and, in a poorly ventilated room, can "
                "displace the oxygen in the air. Wear a face shield and cryogenic gloves when you "
                "dispense them, and never transport dewars in a passenger lift with people inside; send "
                "the dewar in the lift alone and meet it on the other floor. Rooms where large amounts of"
                " liquid nitrogen are stored are fitted with oxygen depletion alarms. If an alarm sounds,"
                " leave the room immediately and do not go back in until the laboratory manager has "
                "checked that it is safe."
            ),
        ),
        (
            "Training, incidents and review",
            (
                "Everyone who works in the laboratories must complete the school's online safety course "
                "and the practical induction given by the laboratory manager before they start work. "
                "Further training is required for specific hazards, such as the use of hydrofluoric acid,"
                " lasers, radioactive materials or high pressure equipment, and must be recorded in your "
                "training record. Refresher training is required every three years. All accidents, "
                "incidents and near misses must be reported through the online incident form within "
                "twenty-four hours, even if nobody was hurt. The school safety officer investigates all "
                "reports, and the findings are discussed at the school safety committee, which meets "
                "every term and includes representatives of staff and students. The laboratory managers "
                "inspect every laboratory once a month and publish the results, and the school carries "
                "out a full safety audit every year. If you have a concern about safety that you do not "
                "feel able to raise with your supervisor, you can contact the school safety officer or "
                "the university's health and safety department in confidence. This handbook will be "
                "reviewed in the light of incidents, changes in the law and comments from its readers. "
                "Please send your suggestions to the school safety officer."
            ),
        ),
    ],
)
